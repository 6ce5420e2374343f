"""Trainings: the one door the Train page trains through (``door``); one body in the worker (``body``) and one relay on
the page (``relay``), carried by this server's queue and worker processes or by RQ jobs on the class's Redis."""
