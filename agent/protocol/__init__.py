"""The agent's side of the action protocol (docs/architecture.md, "The life of an action"):
what it does with each dispatch (serve.py), its ledger on disk (ledger.py), the reports it
builds (reports.py) and the requests it sends until answered (asks.py, outbox.py)."""
