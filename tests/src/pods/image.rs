//! What the test registers as an image, for init containers.

use std::path::PathBuf;

/// What an image is to this runner: its entrypoint (a local binary) and the files it carries,
/// `(host file, path in the image)`.
#[derive(Debug, Clone)]
pub struct Image {
    pub entrypoint: Vec<String>,
    pub files: Vec<(PathBuf, String)>,
}
