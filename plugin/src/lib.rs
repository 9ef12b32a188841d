//! roce-ipvlan: a CNI plugin that gives a pod its own IPvlan L2 netdev on a RoCE rail,
//! so that the pod sees (and may use) that netdev's RoCE v2 GID.
pub mod rdma;
