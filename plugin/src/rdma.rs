//! RDMA side: which RDMA port sits on a netdev, and the GID table as this thread's netns sees it.
