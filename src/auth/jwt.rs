//! HS256 tokens (SPEC 4.3). jsonwebtoken checks the signature and the header algorithm only; the
//! claim rules of 4.3 are applied here, because its defaults contradict them.

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde_json::{Map, Value};

pub struct Jwt {
    enc: EncodingKey,
    dec: DecodingKey,
    validation: Validation,
}

/// The identity a valid token carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub user_id: String,
    pub role: String,
}

/// Longest accepted `user_id` claim.
const MAX_CLAIM_USER_ID: usize = 256;

impl Jwt {
    pub fn new(secret: &[u8]) -> Jwt {
        let mut v = Validation::new(Algorithm::HS256);
        v.required_spec_claims.clear();
        v.validate_exp = false;
        v.validate_nbf = false;
        v.validate_aud = false;
        v.leeway = 0;
        Jwt {
            enc: EncodingKey::from_secret(secret),
            dec: DecodingKey::from_secret(secret),
            validation: v,
        }
    }

    /// Verifies a token at `now_secs`; `None` on any failure.
    pub fn verify(&self, token: &str, now_secs: f64) -> Option<Identity> {
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &self.dec, &self.validation).ok()?;
        let c = data.claims;
        let user_id = match c.get("user_id") {
            Some(Value::String(s)) if !s.is_empty() && s.chars().count() <= MAX_CLAIM_USER_ID => s.clone(),
            _ => return None,
        };
        let num = |k: &str| -> Result<Option<f64>, ()> {
            match c.get(k) {
                None => Ok(None),
                Some(Value::Number(n)) => n.as_f64().map(Some).ok_or(()),
                Some(_) => Err(()),
            }
        };
        if let Some(exp) = num("exp").ok()? {
            if now_secs > exp {
                return None;
            }
        }
        if let Some(nbf) = num("nbf").ok()? {
            if nbf > now_secs {
                return None;
            }
        }
        let role = match c.get("role") {
            Some(Value::String(s)) => s.clone(),
            _ => "user".to_string(),
        };
        Some(Identity { user_id, role })
    }

    pub fn sign(&self, claims: &Map<String, Value>) -> Result<String, String> {
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &self.enc).map_err(|e| e.to_string())
    }
}
