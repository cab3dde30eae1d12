"""tidings.emitter"""
