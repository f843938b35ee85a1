"""Kits: domain toolboxes shared by the stages (SWE-bench, code programs, math answers).

A kit imports only sandbox, kernels and core, never a stage (samplers, verifiers, selection,
tasks). See docs/architecture.md.
"""
