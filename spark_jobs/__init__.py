"""Example PySpark pipelines over minikafka topics (see the README's "Spark" section).

- ``python -m spark_jobs.topic_to_parquet --topic events --out DIR``: batch copy of a topic
  (only committed records, all partitions read in parallel) to Parquet.
- ``python -m spark_jobs.events_per_key --topic events``: a streaming aggregation (records per
  key per time window), printed to the console or written to another topic.

Both take ``--bootstrap-server`` (default: the local cluster in ``--dir .minikafka``).
"""
