"""SASL authentication (KIP-43, KIP-84, KIP-152): the mechanisms' sans-I/O
exchanges, SCRAM credentials and JAAS configuration text.

- `sasl`: the PLAIN and SCRAM-SHA-256/512 server and client exchanges as
  sans-I/O state machines (`plain_server`, `scram_server`, `sasl_client`),
  with Kafka's checks and error messages.
- `scram`: SCRAM credentials as Kafka stores them (salt, stored key, server
  key, iterations; RFC 5802) and their derivation.
- `scram_messages`: parsing and formatting of the four SCRAM messages
  (RFC 5802 section 7) and of saslnames.
- `jaas`: Kafka's `sasl.jaas.config` values (one login module entry), the
  PLAIN users and client credentials they carry, and the login module for
  each mechanism.
- `oauthbearer`: the OAUTHBEARER exchange (KIP-255, RFC 7628) with Kafka's
  unsecured tokens and KIP-768's signed JWTs checked against a JWKS, a
  package split by role (`unsecured`, `signed`, `exchange`).
"""
