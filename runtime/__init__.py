"""Process plumbing every layer may use: settings, logs, the liveness beacon, durable
storage helpers. Imports nothing of the project."""
