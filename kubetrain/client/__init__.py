"""Client core used by the CLI, the Airflow operators and the KFP components."""
