"""Realistic workloads in the shapes common in public training code, each with a data fault."""
