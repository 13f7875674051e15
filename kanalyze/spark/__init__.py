"""The Spark pipeline (optional extra `kanalyze[spark]`): the only package that imports pyspark.

Entry points: `kanalyze spark PATH... --out DIR`, `kanalyze.spark.pipeline.run_pipeline`,
and `spark.read.format("kafka-pcap")` (`kanalyze.spark.datasource`). Importing this package
itself imports nothing heavy; `units` and `rows` need only pyarrow.
"""
