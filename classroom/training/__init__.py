"""Trainings: the one door the Train page trains through, this server's queue and worker processes, or RQ jobs on the class's Redis."""
