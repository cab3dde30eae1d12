"""tidings.watcher"""
