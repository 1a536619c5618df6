//! What the broker transports share.

/// A broker URL fit for a log line or an answer: the password, if it names one, replaced.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((credentials, host)) = rest.rsplit_once('@') else {
        return url.to_owned();
    };
    // A user and a password, or a token alone: only a user's name may be shown.
    match credentials.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => format!("{scheme}://***@{host}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_in_a_broker_url_is_never_shown() {
        assert_eq!(
            redacted("amqp://guest:s3cret@127.0.0.1:5672/%2f"),
            "amqp://guest:***@127.0.0.1:5672/%2f"
        );
        assert_eq!(redacted("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
        assert_eq!(redacted("nats://s3cret@host:4222"), "nats://***@host:4222");
    }
}
