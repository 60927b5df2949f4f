"""``preflight rehearse``: the user's own training script, a few steps on 1 rank and on all.

``bootstrap.py`` runs inside every rank (torch and the standard library only); ``facts.py`` reads
what the ranks wrote; ``preflight.judge.rehearse`` decides; ``checks/test_rehearsal.py`` are the
checks of the pytest session that ``preflight.commands.rehearse`` starts.
"""
