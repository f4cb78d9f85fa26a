"""Reference drivers built on the public ``dralet`` API, as a third-party driver would be."""
