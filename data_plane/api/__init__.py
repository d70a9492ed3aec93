"""The Kafka client API of the broker listener (issue 5 §2), split by area:
``metadata``, ``produce``, ``fetch``, ``offsets``, ``admin``; ``build`` makes
kio responses at whatever version a client negotiated. `data_plane.kafka_api`
assembles the handler table and the advertised versions."""
