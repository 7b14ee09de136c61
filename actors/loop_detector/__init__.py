"""The loop_detector actor: notices an agent going round in circles (spec/01 §5)."""
