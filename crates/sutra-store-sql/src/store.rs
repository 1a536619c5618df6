//! [`SqlStore`]: every area of the store seam, implemented once over a backend's statements.

use sutra_store::Result;

use crate::statements::{Backend, Scope, Statements};

/// The store over backend `B`: each operation of the seam is a script of this crate run over
/// `B`'s statements, so that a backend brings its SQL, its transaction and its opening, and
/// nothing else. A new operation is one script here and one statement per backend.
pub struct SqlStore<B> {
    backend: B,
}

impl<B: Backend> SqlStore<B> {
    pub fn new(backend: B) -> SqlStore<B> {
        SqlStore { backend }
    }

    /// The backend, for what it offers beyond the seam (closing its pool).
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Begins a unit of work for a script of several statements.
    pub(crate) async fn begin(&self, scope: Scope<'_>) -> Result<B::Tx> {
        self.backend.begin(scope).await
    }

    /// The script of an operation in one transaction: begin in `scope`, run `statements`,
    /// commit. How a lone statement runs (in a transaction, or alone where the backend needs
    /// none) is the backend's to decide. A script that fails is rolled back before its error is
    /// answered: dropped, its transaction would keep its row locks until its connection is next
    /// used, and a caller acting on the answer at once would find them held.
    pub(crate) async fn once<T>(
        &self,
        scope: Scope<'_>,
        statements: impl AsyncFnOnce(&mut B::Tx) -> Result<T>,
    ) -> Result<T> {
        let mut tx = self.begin(scope).await?;
        match statements(&mut tx).await {
            Ok(done) => {
                tx.commit().await?;
                Ok(done)
            }
            Err(error) => {
                // A rollback that fails has lost its connection, and the locks with it.
                let _ = tx.rollback().await;
                Err(error)
            }
        }
    }
}
