"""tidings.ui: `tidings ui`, a live web page of the tasks (the ``ui`` extra): the server
(server.py), its one shared list+watch (hub.py), the task pages' lineage and logs (logs.py)
and the HTML made from the view model of schemas/view/model.py (pages.py, templates/, static/).

It reads with the user's own credentials and imports ``schemas``, ``kube`` and the CLI's
readers (cli/kube.py, cli/lineage.py, the logs engine, the timeline renderer); never the
watcher.
"""
