"""The kubetrain Airflow provider (imported as ``kubetrain.operators``)."""
