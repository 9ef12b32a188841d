//! The smallest Kubernetes API client the installer needs: one HTTPS request at a time to the
//! API server named by the pod's environment (`KUBERNETES_SERVICE_HOST`/`_PORT`), with the
//! service account's token, trusting only the service account's CA. Synchronous (no tokio):
//! a TCP connection per request, rustls with the ring provider over it, HTTP/1.1 with
//! `Connection: close`, so the response ends at its length, its last chunk or the end of the
//! stream. The token is read again for each request: projected tokens are rotated on disk.
//! Each request has one deadline (the client's timeout) for all of it: connecting, the TLS
//! handshake, sending and reading the response.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// Where a pod's service account token and the cluster's CA are mounted.
pub const TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
pub const CA: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

/// A response larger than this is cut off as an error (a pod is a few KiB).
const MAX_RESPONSE: usize = 4 << 20;

/// One API server, its credentials and the time each request may take, all of it.
#[derive(Debug, Clone)]
pub struct Client {
    host: String,
    port: u16,
    token: PathBuf,
    ca: PathBuf,
    timeout: Duration,
}

/// An HTTP response: the status, the body (decoded when chunked) and the header a caller
/// acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
    /// `Retry-After` in its seconds form (the API server's 429 and 503 send it); its HTTP-date
    /// form, which kube-apiserver does not send, is ignored.
    pub retry_after: Option<Duration>,
}

impl Response {
    /// The API's `Status.message` when the body is one, else the body's start.
    pub fn message(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(v) if v["message"].is_string() => v["message"].as_str().unwrap_or("").to_string(),
            _ => text.chars().take(300).collect(),
        }
    }
}

impl Client {
    /// The in-cluster client: None when the pod has no `KUBERNETES_SERVICE_HOST` (not in a
    /// cluster); an error when what is there is unusable.
    pub fn in_cluster() -> Result<Option<Client>, String> {
        let Some(host) = std::env::var("KUBERNETES_SERVICE_HOST")
            .ok()
            .filter(|h| !h.is_empty())
        else {
            return Ok(None);
        };
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
        let port = port.parse::<u16>().map_err(|_| {
            format!("KUBERNETES_SERVICE_PORT={port:?} is not a port number: expected 1-65535")
        })?;
        Ok(Some(Client::new(
            &host,
            port,
            Path::new(TOKEN),
            Path::new(CA),
        )))
    }

    pub fn new(host: &str, port: u16, token: &Path, ca: &Path) -> Client {
        Client {
            host: host.to_string(),
            port,
            token: token.to_path_buf(),
            ca: ca.to_path_buf(),
            timeout: Duration::from_secs(10),
        }
    }

    /// Where requests go, for messages.
    pub fn endpoint(&self) -> String {
        format!("https://{}", self.authority())
    }

    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// `PATCH path` with `body` of `content_type`; any HTTP status is a response, the caller
    /// judges it. An error is a request that got no response (credentials, connection, TLS).
    pub fn patch(&self, path: &str, content_type: &str, body: &[u8]) -> Result<Response, String> {
        self.request("PATCH", path, content_type, body)
    }

    /// `POST path` (an Event), as [`Client::patch`].
    pub fn post(&self, path: &str, content_type: &str, body: &[u8]) -> Result<Response, String> {
        self.request("POST", path, content_type, body)
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> Result<Response, String> {
        let token = std::fs::read_to_string(&self.token)
            .map_err(|e| format!("cannot read the service account token {}: {e}: is the token mounted (the installer DaemonSet projects it into the annotate container: volume \"token\")?", self.token.display()))?;
        let token = token.trim();
        let deadline = Instant::now() + self.timeout;
        let config = self.tls_config()?;
        let name = ServerName::try_from(self.host.clone()).map_err(|e| {
            format!(
                "{:?} is not a host name or address: {e}; check KUBERNETES_SERVICE_HOST",
                self.host
            )
        })?;
        let conn = rustls::ClientConnection::new(config, name)
            .map_err(|e| format!("cannot start TLS to {}: {e}", self.endpoint()))?;
        let socket = Deadlined {
            sock: self.connect(deadline)?,
            deadline,
        };
        let mut tls = rustls::StreamOwned::new(conn, socket);
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: {content_type}\r\nAccept: application/json\r\n\
             User-Agent: roce-ipvlan/{}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.authority(),
            env!("CARGO_PKG_VERSION"),
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body);
        tls.write_all(&request)
            .and_then(|()| tls.flush())
            .map_err(|e| self.io_error("cannot send the request to", e))?;
        let mut received = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match tls.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    received.extend_from_slice(&chunk[..n]);
                    if let Some(response) = parse_response(&received, false)? {
                        return Ok(response);
                    }
                    if received.len() > MAX_RESPONSE {
                        return Err(format!(
                            "the response of {} is larger than {MAX_RESPONSE} bytes",
                            self.endpoint()
                        ));
                    }
                }
                // A server closing without TLS close_notify: the response is judged by what came.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(self.io_error("cannot read the response of", e)),
            }
        }
        parse_response(&received, true)?.ok_or_else(|| {
            format!(
                "{} closed the connection after {} bytes, before a whole HTTP response",
                self.endpoint(),
                received.len()
            )
        })
    }

    fn io_error(&self, what: &str, e: io::Error) -> String {
        if matches!(
            e.kind(),
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
        ) {
            // A socket timeout is EAGAIN (WouldBlock); Deadlined's own check is TimedOut.
            format!(
                "{what} {}: the request's {} s deadline passed (connecting, TLS, sending and \
                 the response together): is the API server overloaded or the network lossy?",
                self.endpoint(),
                self.timeout.as_secs_f32()
            )
        } else if e.kind() == io::ErrorKind::InvalidData {
            // rustls reports a certificate it refuses as InvalidData with its reason.
            format!(
                "TLS with {} failed: {e}: the API server's certificate must be signed by {} \
                 (the service account's CA) and name {}",
                self.endpoint(),
                self.ca.display(),
                self.host
            )
        } else {
            format!("{what} {}: {e}", self.endpoint())
        }
    }

    fn tls_config(&self) -> Result<Arc<rustls::ClientConfig>, String> {
        let bad_ca = |e: &dyn std::fmt::Display| {
            format!(
                "cannot read the cluster's CA {}: {e}: is the service account token mounted?",
                self.ca.display()
            )
        };
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(&self.ca).map_err(|e| bad_ca(&e))? {
            roots
                .add(cert.map_err(|e| bad_ca(&e))?)
                .map_err(|e| bad_ca(&e))?;
        }
        if roots.is_empty() {
            return Err(bad_ca(&"no certificate in it"));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS set-up: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Arc::new(config))
    }

    /// A connection to the first address that answers before `deadline`. (The name is
    /// resolved without a deadline of its own: `KUBERNETES_SERVICE_HOST` is an address.)
    fn connect(&self, deadline: Instant) -> Result<TcpStream, String> {
        let addrs: Vec<_> = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {}: {e}", self.endpoint()))?
            .collect();
        let mut last = None;
        for addr in addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                last = Some(io::Error::from(io::ErrorKind::TimedOut));
                break;
            }
            match TcpStream::connect_timeout(&addr, left) {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(match last {
            Some(e) => format!(
                "cannot connect to the API server at {}: {e}",
                self.endpoint()
            ),
            None => format!("{} resolves to no address", self.endpoint()),
        })
    }
}

/// The TCP stream under the request's one deadline: each read and write may take only what is
/// left of it. Per-operation timeouts alone let a server that sends a byte every few seconds
/// hold a request, and the annotator's pass, for as long as it likes.
struct Deadlined {
    sock: TcpStream,
    deadline: Instant,
}

impl Deadlined {
    fn left(&self) -> io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the request's deadline passed",
            ));
        }
        Ok(left)
    }
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.sock.set_read_timeout(Some(self.left()?))?;
        self.sock.read(buf)
    }
}

impl Write for Deadlined {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.sock.set_write_timeout(Some(self.left()?))?;
        self.sock.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.sock.flush()
    }
}

/// The response in `buf` once it is whole; `at_end` when the stream ended (a body without a
/// length then runs to the end). An error for a response that is not HTTP/1.x.
fn parse_response(buf: &[u8], at_end: bool) -> Result<Option<Response>, String> {
    let Some(head_end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = match status_line.split(' ').collect::<Vec<_>>().as_slice() {
        [version, code, ..] if version.starts_with("HTTP/1.") => code.parse::<u16>().ok(),
        _ => None,
    }
    .ok_or_else(|| format!("not an HTTP/1.x response: {status_line:?}"))?;
    let mut length = None;
    let mut chunked = false;
    let mut retry_after = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse::<usize>()
                    .map_err(|_| format!("bad Content-Length {value:?}"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        } else if name.eq_ignore_ascii_case("retry-after") {
            retry_after = value.parse::<u64>().ok().map(Duration::from_secs);
        }
    }
    let rest = &buf[head_end + 4..];
    let body = if chunked {
        match dechunk(rest)? {
            Some(body) => body,
            None if at_end => return Err("the chunked response ended early".into()),
            None => return Ok(None),
        }
    } else if let Some(length) = length {
        if rest.len() < length {
            if at_end {
                return Err(format!(
                    "the response ended after {} of its {length} bytes",
                    rest.len()
                ));
            }
            return Ok(None);
        }
        rest[..length].to_vec()
    } else if at_end {
        rest.to_vec()
    } else {
        return Ok(None);
    };
    Ok(Some(Response {
        status,
        body,
        retry_after,
    }))
}

/// A chunked body, once its last chunk has come.
fn dechunk(mut rest: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let mut body = Vec::new();
    loop {
        let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let size_text = String::from_utf8_lossy(&rest[..line_end]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(Some(body));
        }
        // A size near usize::MAX is a broken or hostile server, not a chunk to wait for: the
        // sum would wrap and the slice below would panic.
        let needed = size
            .checked_add(2)
            .filter(|&n| n <= MAX_RESPONSE)
            .ok_or_else(|| {
                format!("chunk size {size_text:?} is larger than {MAX_RESPONSE} bytes")
            })?;
        if rest.len() < needed {
            return Ok(None);
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// A local HTTPS server for tests (Python's http.server behind ssl, a CA and a certificate for
/// 127.0.0.1 made with openssl): this module's tests and annotate.rs's.
#[cfg(test)]
pub(crate) mod test_server {
    use super::*;
    use std::io::BufRead;
    use std::process::{Child, Command, Stdio};

    /// A local HTTPS server (Python's http.server behind ssl) that prints each request it got
    /// as one JSON line and answers a PATCH of a path ending in /gone with the API server's 404,
    /// in /recreated with its 409 for a UID precondition, in /invalid with a 422 (not the
    /// UID's), in /busy with a 429 and `Retry-After: 20`, in /broken with a 500, any other
    /// with 200.
    const SERVER: &str = r#"
import http.server, json, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_PATCH(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        print(json.dumps({"method": self.command, "path": self.path,
                          "headers": {k.lower(): v for k, v in self.headers.items()},
                          "body": body.decode()}), flush=True)
        status, reply, headers = 200, {"kind": "Pod", "metadata": {"name": "p"}}, {}
        if self.path.endswith("/gone"):
            status, reply = 404, {"kind": "Status", "message": 'pods "gone" not found'}
        elif self.path.endswith("/recreated"):
            status, reply = 409, {"kind": "Status", "message": "Precondition failed: UID in precondition: a, UID in object meta: b"}
        elif self.path.endswith("/invalid"):
            status, reply = 422, {"kind": "Status", "message": "metadata.annotations: Invalid value: too long"}
        elif self.path.endswith("/busy"):
            status, reply, headers = 429, {"kind": "Status", "message": "too many requests"}, {"Retry-After": "20"}
        elif self.path.endswith("/broken"):
            status, reply = 500, {"kind": "Status", "message": "etcdserver: request timed out"}
        reply = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)
    do_POST = do_PATCH
    def log_message(self, *a):
        pass
d = sys.argv[1]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(d + "/server.crt", d + "/server.key")
httpd = http.server.HTTPServer(("127.0.0.1", 0), H)
httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
print(httpd.server_address[1], flush=True)
httpd.serve_forever()
"#;

    pub(crate) struct Server(Child);
    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    pub(crate) fn openssl(dir: &Path, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("this test needs openssl (tests/vm/packages.txt)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `openssl req` with a new P-256 key in `<name>.key` and `args` saying what to make of it.
    fn new_key(dir: &Path, name: &str, args: &[&str]) {
        let key = format!("{name}.key");
        let mut all = vec![
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
        ];
        all.extend_from_slice(args);
        openssl(dir, &all);
    }

    /// A self-signed CA, `<name>.key` and `<name>.crt`.
    pub(crate) fn ca(dir: &Path, name: &str) {
        let (crt, subject) = (format!("{name}.crt"), format!("/CN={name}"));
        new_key(
            dir,
            name,
            &["-x509", "-out", &crt, "-days", "2", "-subj", &subject],
        );
    }

    /// Starts the server with certificates in `dir`: ca.crt (trusted), other.crt (another
    /// CA), server.crt for 127.0.0.1 signed by ca, and a token file. Returns the server (killed
    /// when dropped), its port, and the lines it prints (one JSON object per request).
    pub(crate) fn start(
        dir: &Path,
    ) -> (
        Server,
        u16,
        std::io::Lines<io::BufReader<std::process::ChildStdout>>,
    ) {
        ca(dir, "ca");
        ca(dir, "other");
        new_key(
            dir,
            "server",
            &["-new", "-out", "server.csr", "-subj", "/CN=kube-apiserver"],
        );
        std::fs::write(
            dir.join("ext.cnf"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
             extendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-out",
                "server.crt",
                "-extfile",
                "ext.cnf",
            ],
        );
        std::fs::write(dir.join("token"), "s3cret-token\n").unwrap();
        let mut child = Command::new("python3")
            .args(["-c", SERVER, dir.to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("this test needs python3");
        let mut lines = io::BufReader::new(child.stdout.take().unwrap()).lines();
        let server = Server(child);
        let port: u16 = lines.next().unwrap().unwrap().trim().parse().unwrap();
        (server, port, lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    /// The request as the API server gets it: method, path, content type, bearer token, body;
    /// over TLS verified against the given CA for the address connected to. A server whose
    /// certificate another CA signed, or that names another host, is refused.
    #[test]
    fn patch_over_tls_sends_what_the_api_server_expects() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (_server, port, mut lines) = test_server::start(dir);

        let client = Client::new("127.0.0.1", port, &dir.join("token"), &dir.join("ca.crt"));
        let body = br#"{"metadata":{"uid":"u-1","annotations":{"roce-ipvlan.io/gids":"[]"}}}"#;
        let response = client
            .patch(
                "/api/v1/namespaces/ml/pods/p",
                "application/merge-patch+json",
                body,
            )
            .unwrap();
        assert_eq!(response.status, 200);
        let pod: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
        assert_eq!(pod["metadata"]["name"], "p");
        let got: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert_eq!(got["method"], "PATCH");
        assert_eq!(got["path"], "/api/v1/namespaces/ml/pods/p");
        assert_eq!(
            got["headers"]["content-type"],
            "application/merge-patch+json"
        );
        assert_eq!(got["headers"]["authorization"], "Bearer s3cret-token");
        assert_eq!(got["headers"]["host"], format!("127.0.0.1:{port}"));
        assert_eq!(got["body"], std::str::from_utf8(body).unwrap());

        let wrong_ca = Client::new(
            "127.0.0.1",
            port,
            &dir.join("token"),
            &dir.join("other.crt"),
        );
        let err = wrong_ca.patch("/x", "application/json", b"{}").unwrap_err();
        assert!(err.contains("TLS") && err.contains("other.crt"), "{err}");
        // The certificate names 127.0.0.1, not localhost.
        let wrong_name = Client::new("localhost", port, &dir.join("token"), &dir.join("ca.crt"));
        let err = wrong_name
            .patch("/x", "application/json", b"{}")
            .unwrap_err();
        assert!(err.contains("TLS"), "{err}");
        // Neither reached the handler.
        let no_ca = Client::new("127.0.0.1", port, &dir.join("token"), &dir.join("none.crt"));
        let err = no_ca.patch("/x", "application/json", b"{}").unwrap_err();
        assert!(err.contains("none.crt"), "{err}");
        let ok = client.patch("/again", "application/json", b"{}").unwrap();
        assert_eq!(ok.status, 200);
        let got: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert_eq!(got["path"], "/again", "the refused clients sent nothing");
    }

    #[test]
    fn responses_are_read_by_length_chunks_or_end() {
        let whole =
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        assert_eq!(
            parse_response(whole, false).unwrap(),
            Some(Response {
                status: 200,
                body: b"{}".to_vec(),
                retry_after: None,
            })
        );
        assert_eq!(
            parse_response(&whole[..whole.len() - 1], false).unwrap(),
            None
        );
        assert!(parse_response(&whole[..whole.len() - 1], true).is_err());
        let chunked =
            b"HTTP/1.1 403 Forbidden\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3;x=y\r\n:1}\r\n0\r\n\r\n";
        let r = parse_response(chunked, false).unwrap().unwrap();
        assert_eq!((r.status, r.body.as_slice()), (403, &b"{\"a\":1}"[..]));
        assert_eq!(parse_response(&chunked[..60], false).unwrap(), None);
        let to_end = b"HTTP/1.0 500 x\r\n\r\nboom";
        assert_eq!(parse_response(to_end, false).unwrap(), None);
        assert_eq!(parse_response(to_end, true).unwrap().unwrap().body, b"boom");
        assert!(parse_response(b"SSH-2.0\r\n\r\n", true).is_err());
    }

    #[test]
    fn retry_after_is_read_in_its_seconds_form() {
        let with = |value: &str| {
            let text = format!("HTTP/1.1 429 Too Many Requests\r\nRetry-After: {value}\r\nContent-Length: 0\r\n\r\n");
            parse_response(text.as_bytes(), false)
                .unwrap()
                .unwrap()
                .retry_after
        };
        assert_eq!(with("7"), Some(Duration::from_secs(7)));
        assert_eq!(with(" 120 "), Some(Duration::from_secs(120)));
        assert_eq!(with("Fri, 04 Dec 2026 19:00:00 GMT"), None);
        assert_eq!(with("-1"), None);
        assert_eq!(with("99999999999999999999999"), None);
        let none = b"HTTP/1.1 503 x\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(
            parse_response(none, false).unwrap().unwrap().retry_after,
            None
        );
    }

    /// A server that answers a byte at a time, each well within the per-read time, still ends
    /// the request at its one deadline: here a TLS record header announcing 16 KiB, then a
    /// byte every 50 ms (about 14 minutes for the record).
    #[test]
    fn a_trickling_server_is_cut_off_at_the_requests_deadline() {
        use std::net::TcpListener;
        let tmp = tempfile::tempdir().unwrap();
        test_server::ca(tmp.path(), "ca");
        std::fs::write(tmp.path().join("token"), "t").unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let _ = s.write_all(&[0x16, 0x03, 0x03, 0x40, 0x00]);
            while s.write_all(&[0]).is_ok() {
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let mut client = Client::new(
            "127.0.0.1",
            port,
            &tmp.path().join("token"),
            &tmp.path().join("ca.crt"),
        );
        client.timeout = Duration::from_millis(500);
        let (tx, rx) = std::sync::mpsc::channel();
        let start = Instant::now();
        std::thread::spawn(move || {
            let _ = tx.send(client.patch("/x", "application/json", b"{}"));
        });
        let got = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the request outlived its 500 ms deadline by 4.5 s");
        let err = got.unwrap_err();
        assert!(err.contains("deadline"), "{err}");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn a_huge_chunk_size_is_an_error_not_a_panic() {
        for size in ["ffffffffffffffff", "fffffffffffffffe", "1000000"] {
            let chunked =
                format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{size}\r\nabc\r\n");
            let e = parse_response(chunked.as_bytes(), false).unwrap_err();
            assert!(e.contains("is larger than"), "{size}: {e}");
        }
    }

    #[test]
    fn the_api_status_message_is_what_a_log_shows() {
        let r = Response {
            status: 403,
            body: br#"{"kind":"Status","message":"pods \"p\" is forbidden: User \"x\" cannot patch resource \"pods\""}"#.to_vec(),
            retry_after: None,
        };
        assert!(r.message().starts_with("pods \"p\" is forbidden"));
        let r = Response {
            status: 502,
            body: b"bad gateway".to_vec(),
            retry_after: None,
        };
        assert_eq!(r.message(), "bad gateway");
    }
}
