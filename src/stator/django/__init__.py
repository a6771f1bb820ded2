"""Stator for Django: ``StatorModel``, ``manage.py runstator``, the admin, the in-request runner.

Add ``"stator.django"`` to ``INSTALLED_APPS``; ``manage.py migrate`` then creates Stator's own
tables.  The engine is the one ``stator run`` uses: only the store differs (it runs the same
SQL through Django's connections, see ``stator/_store/_django.py``).
"""
