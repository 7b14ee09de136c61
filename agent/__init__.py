"""The workstation agent: transport, ledger, capture, executors."""
