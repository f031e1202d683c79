"""The scoring fleet: rate against replicas, cost, added latency, memory and faults, on the load-balancing
path (fleet.py) and the Kafka path (fleet_kafka.py)."""
