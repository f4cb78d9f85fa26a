"""hostdev: a DRA driver for any host device node, configured, not coded.

Groups of device nodes (FPGAs behind ``/dev/xdma*``, serial ports, ``/dev/kvm``,
``/dev/fuse``, loop devices ...) are published as devices with stable names and
attributes from udev and sysfs, and given to containers through CDI. See
``docs/hostdev.md``.
"""

from dralet.drivers.hostdev.backend import HostDevices
from dralet.drivers.hostdev.config import ConfigError, HostdevConfig, load_config
from dralet.drivers.hostdev.factory import factory

__all__ = ["ConfigError", "HostDevices", "HostdevConfig", "factory", "load_config"]
