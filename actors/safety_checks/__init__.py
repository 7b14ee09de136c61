"""The safety_checks actor: the checklist a person acknowledges before a critical step."""
