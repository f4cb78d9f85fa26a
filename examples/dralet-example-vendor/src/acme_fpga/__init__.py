"""Acme FPGAs as a DRA driver, built on ``dralet`` alone: ``dralet run --driver acme-fpga``."""

from acme_fpga.driver import DRIVER_NAME, AcmeFPGAs, factory

__all__ = ["DRIVER_NAME", "AcmeFPGAs", "factory"]
