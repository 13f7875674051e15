"""Kafka protocol dissectors: generated schemas, the generic decoder, records, codecs.

Headless: nothing here imports textual, pyspark or scapy.
"""
