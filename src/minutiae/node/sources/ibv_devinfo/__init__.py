"""ibv_devinfo: RDMA device and port state from ``ibv_devinfo [-v]`` text."""
