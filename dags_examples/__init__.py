"""Example DAGs of the SMS provider, and ``python -m dags_examples.demo`` (``make demo``).

Each DAG file is self-contained: copy it into your own DAGs folder and adapt the lists, numbers and
texts. Every one of them runs in the test suite with ``airflow dags test`` against the sandbox.
"""
