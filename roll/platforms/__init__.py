"""Platform compatibility layers (engines that assume hardware this machine may not have)."""
