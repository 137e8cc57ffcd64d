"""The process node: pods bound to it run as local processes, so real training runs on the dev cluster."""
