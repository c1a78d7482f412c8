//! The `echo.Echo` gRPC service, written by hand in the shape tonic-build generates from
//!
//! ```text
//! syntax = "proto3";
//! package echo;
//! service Echo { rpc UnaryEcho(EchoRequest) returns (EchoReply); }
//! message EchoRequest { bytes payload = 1; }
//! message EchoReply { bytes payload = 1; string peer = 2; }
//! ```
//! so that the example builds without protoc: the messages, the client, and the server's
//! trait with the tower service that routes to it.

use std::sync::Arc;
use std::task::{Context, Poll};
use tonic::codegen::{http, Body, BoxFuture, Service, StdError};

/// The request: bytes to echo.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct EchoRequest {
    /// The bytes to send back.
    #[prost(bytes = "vec", tag = "1")]
    pub payload: Vec<u8>,
}

/// The answer: the same bytes, and the client's address as the server saw it.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct EchoReply {
    /// The request's bytes.
    #[prost(bytes = "vec", tag = "1")]
    pub payload: Vec<u8>,
    /// The address of the client's end of the connection.
    #[prost(string, tag = "2")]
    pub peer: String,
}

const SERVICE: &str = "echo.Echo";
const UNARY_ECHO: &str = "/echo.Echo/UnaryEcho";

/// The client: calls over any tonic channel.
#[derive(Debug, Clone)]
pub(crate) struct EchoClient {
    inner: tonic::client::Grpc<tonic::transport::Channel>,
}

impl EchoClient {
    /// A client calling over `channel`.
    pub(crate) fn new(channel: tonic::transport::Channel) -> Self {
        EchoClient {
            inner: tonic::client::Grpc::new(channel),
        }
    }

    /// `rpc UnaryEcho(EchoRequest) returns (EchoReply)`.
    pub(crate) async fn unary_echo(
        &mut self,
        request: impl tonic::IntoRequest<EchoRequest>,
    ) -> Result<tonic::Response<EchoReply>, tonic::Status> {
        self.inner.ready().await.map_err(|e| {
            tonic::Status::unknown(format!("the channel is not ready: {}", StdError::from(e)))
        })?;
        let mut request = request.into_request();
        request
            .extensions_mut()
            .insert(tonic::GrpcMethod::new(SERVICE, "UnaryEcho"));
        let path = http::uri::PathAndQuery::from_static(UNARY_ECHO);
        let codec = tonic::codec::ProstCodec::default();
        self.inner.unary(request, path, codec).await
    }
}

/// What a server of `echo.Echo` implements.
#[tonic::async_trait]
pub(crate) trait Echo: Send + Sync + 'static {
    /// `rpc UnaryEcho(EchoRequest) returns (EchoReply)`.
    async fn unary_echo(
        &self,
        request: tonic::Request<EchoRequest>,
    ) -> Result<tonic::Response<EchoReply>, tonic::Status>;
}

/// The tower service that serves an [`Echo`] implementation (give it to
/// `Server::builder().add_service`).
#[derive(Debug)]
pub(crate) struct EchoServer<T> {
    inner: Arc<T>,
}

impl<T: Echo> EchoServer<T> {
    /// Serves `inner`.
    pub(crate) fn new(inner: T) -> Self {
        EchoServer {
            inner: Arc::new(inner),
        }
    }
}

impl<T> Clone for EchoServer<T> {
    fn clone(&self) -> Self {
        EchoServer {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T> tonic::server::NamedService for EchoServer<T> {
    const NAME: &'static str = SERVICE;
}

/// `UnaryEcho` as the unary service tonic's server codec drives.
struct UnaryEchoService<T>(Arc<T>);

impl<T: Echo> tonic::server::UnaryService<EchoRequest> for UnaryEchoService<T> {
    type Response = EchoReply;
    type Future = BoxFuture<tonic::Response<EchoReply>, tonic::Status>;

    fn call(&mut self, request: tonic::Request<EchoRequest>) -> Self::Future {
        let inner = Arc::clone(&self.0);
        Box::pin(async move { inner.unary_echo(request).await })
    }
}

impl<T, B> Service<http::Request<B>> for EchoServer<T>
where
    T: Echo,
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::BoxBody>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != UNARY_ECHO {
            let path = request.uri().path().to_string();
            return Box::pin(async move {
                Ok(tonic::Status::unimplemented(format!("no method {path}")).into_http())
            });
        }
        let method = UnaryEchoService(Arc::clone(&self.inner));
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(tonic::codec::ProstCodec::default());
            Ok(grpc.unary(method, request).await)
        })
    }
}
