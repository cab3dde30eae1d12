"""tidings.cli"""
