"""The provider's app on the Airflow API server: its assembly, its plugin and the refusals both of its
routers answer with. Not public API, but for :mod:`.plugin`'s class (see the public names).
"""
