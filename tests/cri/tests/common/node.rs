//! The runtimes the shared checks drive: containerd and CRI-O behind one trait.

use std::path::{Path, PathBuf};

use tern_cri::client::{CriClient, PodRef};
use tern_cri::CriError;

/// A private runtime the checks drive.
pub trait Node {
    /// The instance directory (the plugins' data dirs are under it).
    fn dir(&self) -> &Path;
    /// Where the runtime must have put the pod netns files.
    fn netns_root(&self) -> PathBuf;
    /// The connected CRI client.
    fn client(&mut self) -> &mut CriClient;
    /// `RunPodSandbox` for `pod` on the default network.
    fn run(&mut self, pod: &PodRef) -> Result<String, CriError>;
    /// The netns path of sandbox `id`.
    fn netns_path(&mut self, id: &str) -> Result<PathBuf, CriError>;
}

impl Node for tern_cri::containerd::Containerd {
    fn dir(&self) -> &Path {
        tern_cri::containerd::Containerd::dir(self)
    }
    fn netns_root(&self) -> PathBuf {
        tern_cri::containerd::Containerd::dir(self).join("state")
    }
    fn client(&mut self) -> &mut CriClient {
        self.cri().unwrap()
    }
    fn run(&mut self, pod: &PodRef) -> Result<String, CriError> {
        self.run_sandbox(pod, None)
    }
    fn netns_path(&mut self, id: &str) -> Result<PathBuf, CriError> {
        tern_cri::containerd::Containerd::netns_path(self, id)
    }
}

impl Node for tern_cri::crio::Crio {
    fn dir(&self) -> &Path {
        tern_cri::crio::Crio::dir(self)
    }
    fn netns_root(&self) -> PathBuf {
        self.netns_dir()
    }
    fn client(&mut self) -> &mut CriClient {
        self.cri().unwrap()
    }
    fn run(&mut self, pod: &PodRef) -> Result<String, CriError> {
        self.run_sandbox(pod)
    }
    fn netns_path(&mut self, id: &str) -> Result<PathBuf, CriError> {
        tern_cri::crio::Crio::netns_path(self, id)
    }
}
