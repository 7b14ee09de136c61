"""The loop_detector actor: notices an agent going round in circles
(docs/screens-and-pauses.md)."""
