"""The fork server's last preload: its objects leave the garbage collector's view before it forks the first point.

After the imports of :data:`launcher.cluster.point_process.PRELOAD` the server holds about a million objects. In a
forked point every collection of the oldest generation walked all of them, writing to each object's header, so the
first collections copied the server's whole heap page by page (copy-on-write) and then kept scanning it: measured on
the demo (issue 29), unpickling the point's payload right after the fork took 0.3 s in the point against 0.02 s in a
fresh process with the same imports. :func:`gc.freeze` moves them into a permanent generation that collections skip
(the remedy the ``gc`` documentation gives for forking servers). Imported by the fork server only.
"""

import gc

gc.freeze()
