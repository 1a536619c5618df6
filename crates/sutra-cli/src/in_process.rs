//! The engine run inside this process, for the commands that bring their own (`demo`, `bench`):
//! a scratch directory for an embedded store, and the server run beside a driver that talks to
//! it over loopback HTTP, as any client would.

use std::future::Future;
use std::path::{Path, PathBuf};

use sutra_server::config::Sources;
use tokio::sync::oneshot;

/// A directory under the system's temporary directory, removed with everything in it on drop.
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    /// `sutra-{purpose}-{pid}`: one per command run, so parallel runs do not collide.
    pub fn create(purpose: &str) -> Result<ScratchDir, String> {
        let path = std::env::temp_dir().join(format!("sutra-{purpose}-{}", std::process::id()));
        std::fs::create_dir_all(&path)
            .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        Ok(ScratchDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Leaves the directory in place, for someone to read what is in it.
    pub fn keep(self) -> PathBuf {
        let path = self.path.clone();
        std::mem::forget(self);
        path
    }

    /// Writes `contents` to the file `name` in this directory.
    pub fn file(&self, name: &str, contents: &str) -> Result<PathBuf, String> {
        let path = self.path.join(name);
        std::fs::write(&path, contents)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(path)
    }

    /// The datasource of an embedded store in this directory.
    pub fn sqlite_datasource(&self) -> String {
        format!("sqlite://{}", self.path.join("sutra.db").display())
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Runs the engine configured by `sources` and `drive` side by side in this task (`join!`, not
/// `spawn`: the server's future is not `Send`), handing `drive` the server's base URL and
/// stopping the engine once `drive` is done. The engine's start-up error wins over the driver's
/// outcome, since the driver never ran then.
/// The RabbitMQ the commands that run an engine here (`demo`, `bench amqp-start`) use: the one
/// configured for `sutra serve` (`SUTRA_TRANSPORTS_AMQP_URL`), else RabbitMQ's local default.
pub fn rabbitmq_url() -> String {
    std::env::var("SUTRA_TRANSPORTS_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

pub async fn serve_while<T, F, Fut>(sources: Sources, drive: F) -> Result<T, String>
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let settings = sources.settings().map_err(|e| e.to_string())?;
    let (stop, stopped) = oneshot::channel::<()>();
    let (bound, listening) = oneshot::channel();
    let server = sutra_server::serve_until(
        settings,
        async {
            let _ = stopped.await;
        },
        |addr| {
            let _ = bound.send(addr);
        },
    );
    let driver = async {
        // The engine failed to start when `bound` is dropped unsent; its error is `served`'s.
        let Ok(addr) = listening.await else {
            return None;
        };
        let driven = drive(format!("http://{addr}")).await;
        let _ = stop.send(());
        Some(driven)
    };
    let (served, driven) = tokio::join!(server, driver);
    served.map_err(|e| e.to_string())?;
    driven.unwrap_or_else(|| Err("the engine stopped before it listened".to_owned()))
}
