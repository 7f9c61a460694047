"""What planning to the measured error costs, and whether its plans keep what it promises."""
