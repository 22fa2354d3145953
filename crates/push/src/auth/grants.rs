//! What a token allows: the topic patterns its holder may subscribe to and
//! publish on. A requested pattern is allowed when a granted pattern covers
//! every topic it can match (`a.>` covers `a.*` and `a.b.c`; `a.*` does not
//! cover `a.>`).

use tidegate_hub::topic::Token;
use tidegate_hub::Pattern;

use super::jwt::JwtError;

/// The rights of one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grants {
    subject: Option<String>,
    /// `None`: anything (auth off).
    subscribe: Option<Vec<Vec<Token>>>,
    publish: Option<Vec<Vec<Token>>>,
}

fn tokens(p: &Pattern) -> Vec<Token> {
    if p.is_literal() {
        p.as_str()
            .split('.')
            .map(|t| Token::Literal(t.to_owned()))
            .collect()
    } else {
        p.tokens().to_vec()
    }
}

fn parse_all(list: &[String], claim: &'static str) -> Result<Vec<Vec<Token>>, JwtError> {
    list.iter()
        .map(|p| {
            Pattern::parse(p)
                .map(|p| tokens(&p))
                .map_err(|_| JwtError::BadClaim(claim))
        })
        .collect()
}

/// Whether every topic matched by `want` is matched by `have`.
fn covers(have: &[Token], want: &[Token]) -> bool {
    // A pattern that starts with a wildcard matches no `$sys.` topic (the
    // bus's rule, `Pattern::matches`), so it covers none: `>` does not
    // grant `$sys.stats`.
    let sys = matches!(want.first(), Some(Token::Literal(t)) if t == "$sys");
    if sys && !matches!(have.first(), Some(Token::Literal(_))) {
        return false;
    }
    for (i, h) in have.iter().enumerate() {
        match (h, want.get(i)) {
            (Token::Rest, Some(_)) => return true,
            (_, None) => return false,
            (Token::Star, Some(Token::Literal(_) | Token::Star)) => {}
            (Token::Literal(a), Some(Token::Literal(b))) if a == b => {}
            _ => return false,
        }
    }
    have.len() == want.len()
}

fn allowed(grants: &Option<Vec<Vec<Token>>>, pattern: &str) -> bool {
    match grants {
        None => true,
        Some(list) => Pattern::parse(pattern)
            .map(|p| tokens(&p))
            .is_ok_and(|want| list.iter().any(|have| covers(have, &want))),
    }
}

impl Grants {
    /// Everything allowed (auth off).
    pub fn all() -> Self {
        Grants {
            subject: None,
            subscribe: None,
            publish: None,
        }
    }

    /// The grants of a verified token.
    pub fn new(
        subject: Option<String>,
        subscribe: &[String],
        publish: &[String],
    ) -> Result<Self, JwtError> {
        Ok(Grants {
            subject,
            subscribe: Some(parse_all(subscribe, "subscribe")?),
            publish: Some(parse_all(publish, "publish")?),
        })
    }

    /// The token's `sub`.
    pub fn subject(&self) -> Option<&str> {
        self.subject.as_deref()
    }

    /// Whether subscribing to `pattern` is allowed.
    pub fn may_subscribe(&self, pattern: &str) -> bool {
        allowed(&self.subscribe, pattern)
    }

    /// Whether publishing on `topic` is allowed.
    pub fn may_publish(&self, topic: &str) -> bool {
        allowed(&self.publish, topic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coverage_follows_what_patterns_can_match() {
        let g = Grants::new(None, &["a.>".into(), "x.*.z".into()], &[]).unwrap();
        for ok in ["a.b", "a.*", "a.>", "a.b.c", "x.y.z", "x.*.z"] {
            assert!(g.may_subscribe(ok), "{ok}");
        }
        for no in ["a", ">", "x.>", "x.y", "x.y.z.w", "b.c", "x.y.*"] {
            assert!(!g.may_subscribe(no), "{no}");
        }
        assert!(!g.may_publish("a.b"));
        assert!(Grants::all().may_publish("anything"));
    }

    #[test]
    fn a_leading_wildcard_grants_no_system_topic() {
        let g = Grants::new(None, &[">".into(), "*.stats".into()], &[]).unwrap();
        for no in ["$sys.stats", "$sys.>", "$sys.*"] {
            assert!(!g.may_subscribe(no), "{no}");
        }
        assert!(g.may_subscribe("a.stats") && g.may_subscribe("a.b.c"));
        let sys = Grants::new(None, &["$sys.>".into()], &[]).unwrap();
        assert!(sys.may_subscribe("$sys.stats"));
    }
}
