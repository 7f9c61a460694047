"""The execution DAG's schema and rules: the schema view, the DAG rule families, ``check_dag`` and ``fix_dag``."""
