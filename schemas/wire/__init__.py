"""The wire: what travels between a workload and the watcher (pure, the bottom layer).

The payload models and their kinds, the note codec, the Event and the contract of where the
bus lives on the API server, the record format of status entries, and the small rules both
ends share (text neutralising, times, names, caps, the metric history sample). It imports
nothing of the layers above it (engine, status, view); the emitter loads this layer alone.
"""
