"""Coordinators that run inside a broker (Kafka's ``kafka.coordinator``)."""
