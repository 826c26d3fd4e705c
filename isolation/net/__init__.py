"""The sandbox's network: the egress proxy, its policy, and the credentials it adds for named hosts."""
