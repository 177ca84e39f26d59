"""The group coordinator: consumer group membership, rebalances and committed offsets."""
