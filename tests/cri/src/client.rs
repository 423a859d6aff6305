//! A small blocking CRI `runtime.v1` client over a Unix socket, as crictl would use it.
//!
//! Invariant: every call carries a deadline (the gRPC `grpc-timeout` header and a local timer), so
//! a wedged containerd fails a test instead of hanging it. The client owns a current-thread tokio
//! runtime and never enters a network namespace.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::proto::runtime_service_client::RuntimeServiceClient;
use crate::proto::{
    LinuxPodSandboxConfig, ListPodSandboxRequest, PodSandbox, PodSandboxConfig, PodSandboxMetadata,
    PodSandboxStatusRequest, PodSandboxStatusResponse, RemovePodSandboxRequest,
    RunPodSandboxRequest, RuntimeCondition, StatusRequest, StopPodSandboxRequest, VersionRequest,
    VersionResponse,
};
use crate::CriError;

/// Default deadline of one CRI call (RunPodSandbox includes image checks, runc and the CNI ADD).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// A connected CRI client.
pub struct CriClient {
    rt: tokio::runtime::Runtime,
    client: RuntimeServiceClient<Channel>,
    timeout: Duration,
}

/// The pod a sandbox is for: what kubelet puts into `PodSandboxMetadata`, and thus what the CRI
/// plugin passes to CNI as `K8S_POD_NAMESPACE`, `K8S_POD_NAME` and `K8S_POD_UID`.
#[derive(Clone, Debug)]
pub struct PodRef {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
}

impl PodRef {
    /// A pod reference.
    pub fn new(namespace: &str, name: &str, uid: &str) -> PodRef {
        PodRef {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
        }
    }

    /// The `PodSandboxConfig` kubelet would send for this pod (pod network namespace, hostname =
    /// name), with its cgroups under `cgroup_parent` (cgroupfs syntax, e.g. `/tern-cri-123`).
    pub fn sandbox_config(&self, cgroup_parent: &str) -> PodSandboxConfig {
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: self.name.clone(),
                uid: self.uid.clone(),
                namespace: self.namespace.clone(),
                attempt: 0,
            }),
            hostname: self.name.clone(),
            labels: HashMap::from([("tern.io/test".to_owned(), "cri".to_owned())]),
            linux: Some(LinuxPodSandboxConfig {
                cgroup_parent: cgroup_parent.to_owned(),
                ..LinuxPodSandboxConfig::default()
            }),
            ..PodSandboxConfig::default()
        }
    }
}

impl CriClient {
    /// Connects to the CRI socket at `socket` (containerd's gRPC address).
    ///
    /// # Errors
    /// [`CriError::Runtime`] when the tokio runtime cannot be built, [`CriError::Connect`] when
    /// the socket does not accept an HTTP/2 connection within 10 s.
    pub fn connect(socket: &Path) -> Result<CriClient, CriError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(CriError::Runtime)?;
        let path: PathBuf = socket.to_path_buf();
        // The URI is required by tonic but unused: the connector dials the socket.
        let endpoint =
            Endpoint::from_static("http://[::]:0").connect_timeout(Duration::from_secs(10));
        let channel = rt
            .block_on(
                endpoint.connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move {
                        Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?))
                    }
                })),
            )
            .map_err(|source| CriError::Connect {
                socket: socket.to_path_buf(),
                source,
            })?;
        Ok(CriClient {
            rt,
            client: RuntimeServiceClient::new(channel),
            timeout: CALL_TIMEOUT,
        })
    }

    /// Sets the deadline of every later call.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    fn call<T, F, Fut>(&mut self, rpc: &'static str, f: F) -> Result<T, CriError>
    where
        F: FnOnce(RuntimeServiceClient<Channel>, Duration) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let timeout = self.timeout;
        let fut = f(self.client.clone(), timeout);
        match self.rt.block_on(async {
            // A little slack over the gRPC deadline, so containerd's own DeadlineExceeded wins.
            tokio::time::timeout(timeout + Duration::from_secs(2), fut).await
        }) {
            Ok(Ok(resp)) => Ok(resp.into_inner()),
            Ok(Err(status)) => Err(CriError::Rpc {
                rpc,
                status: Box::new(status),
            }),
            Err(_) => Err(CriError::Timeout {
                what: format!("CRI {rpc}"),
                secs: timeout.as_secs(),
            }),
        }
    }

    /// `Version`: the runtime's name, version and CRI API version.
    ///
    /// # Errors
    /// [`CriError::Rpc`] or [`CriError::Timeout`].
    pub fn version(&mut self) -> Result<VersionResponse, CriError> {
        self.call("Version", |mut c, t| async move {
            c.version(req(
                VersionRequest {
                    version: "v1".into(),
                },
                t,
            ))
            .await
        })
    }

    /// `RunPodSandbox` with `config` on `runtime_handler` (`""`: the default); returns the
    /// sandbox ID.
    ///
    /// # Errors
    /// [`CriError::Rpc`] (for example the CNI ADD failed: the message carries the plugin's) or
    /// [`CriError::Timeout`].
    pub fn run_pod_sandbox(
        &mut self,
        config: PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String, CriError> {
        let runtime_handler = runtime_handler.to_owned();
        let r = self.call("RunPodSandbox", |mut c, t| async move {
            c.run_pod_sandbox(req(
                RunPodSandboxRequest {
                    config: Some(config),
                    runtime_handler,
                },
                t,
            ))
            .await
        })?;
        Ok(r.pod_sandbox_id)
    }

    /// `PodSandboxStatus`; with `verbose`, `info` holds containerd's JSON (`info` key: pid,
    /// runtimeSpec with the netns path, ...).
    ///
    /// # Errors
    /// [`CriError::Rpc`] (NotFound for an unknown ID) or [`CriError::Timeout`].
    pub fn pod_sandbox_status(
        &mut self,
        id: &str,
        verbose: bool,
    ) -> Result<PodSandboxStatusResponse, CriError> {
        let id = id.to_owned();
        self.call("PodSandboxStatus", |mut c, t| async move {
            c.pod_sandbox_status(req(
                PodSandboxStatusRequest {
                    pod_sandbox_id: id,
                    verbose,
                },
                t,
            ))
            .await
        })
    }

    /// `StopPodSandbox`: kills the sandbox's processes and tears its network down (CNI DEL).
    ///
    /// # Errors
    /// [`CriError::Rpc`] or [`CriError::Timeout`].
    pub fn stop_pod_sandbox(&mut self, id: &str) -> Result<(), CriError> {
        let id = id.to_owned();
        self.call("StopPodSandbox", |mut c, t| async move {
            c.stop_pod_sandbox(req(StopPodSandboxRequest { pod_sandbox_id: id }, t))
                .await
        })
        .map(|_| ())
    }

    /// `RemovePodSandbox`: removes a stopped sandbox and its netns.
    ///
    /// # Errors
    /// [`CriError::Rpc`] or [`CriError::Timeout`].
    pub fn remove_pod_sandbox(&mut self, id: &str) -> Result<(), CriError> {
        let id = id.to_owned();
        self.call("RemovePodSandbox", |mut c, t| async move {
            c.remove_pod_sandbox(req(RemovePodSandboxRequest { pod_sandbox_id: id }, t))
                .await
        })
        .map(|_| ())
    }

    /// `ListPodSandbox` without a filter: every sandbox containerd knows.
    ///
    /// # Errors
    /// [`CriError::Rpc`] or [`CriError::Timeout`].
    pub fn list_pod_sandbox(&mut self) -> Result<Vec<PodSandbox>, CriError> {
        let r = self.call("ListPodSandbox", |mut c, t| async move {
            c.list_pod_sandbox(req(ListPodSandboxRequest { filter: None }, t))
                .await
        })?;
        Ok(r.items)
    }
}

impl CriClient {
    /// `Status`: the runtime's conditions (`RuntimeReady`, `NetworkReady`: the latter is the
    /// runtime's view of its CNI network, which kubelet turns into the node's readiness).
    ///
    /// # Errors
    /// [`CriError::Rpc`] or [`CriError::Timeout`].
    pub fn status(&mut self) -> Result<Vec<RuntimeCondition>, CriError> {
        let r = self.call("Status", |mut c, t| async move {
            c.status(req(StatusRequest { verbose: false }, t)).await
        })?;
        Ok(r.status.map(|s| s.conditions).unwrap_or_default())
    }
}

/// A request with its gRPC deadline.
fn req<T>(msg: T, timeout: Duration) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.set_timeout(timeout);
    r
}
