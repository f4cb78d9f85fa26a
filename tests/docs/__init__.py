"""Tests of the documentation site: its commands run, it builds, its links resolve."""
