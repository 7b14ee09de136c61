"""The watchdog actor: timers of in-flight actions; asks the dispatcher to resend or give up."""
