"""The broker process itself (Kafka's ``kafka.server``): KafkaServer wiring the collaborators, the
configuration, the API handlers (KafkaApis, metadata, admin), the metadata cache and observability."""
