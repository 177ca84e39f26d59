"""The broker's network layer (Kafka's ``kafka.network``): the Kafka-framed socket listeners (client
Kafka listeners and the replica fetch listener), the Kafka wire codec, and the request boundary
(bounds checked before decoding, typed error answers)."""
