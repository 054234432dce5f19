//! How an endpoint is declared: once, as data. The router matches its method and path, the
//! handler reads each parameter through the parameter's own declaration (type, limits, presence
//! and messages, see `params`), and the OpenAPI document, the idempotency rules and the reference
//! response style are all built from the same declaration, as ripgrep's flag definitions feed both
//! its parser and its documentation. A new endpoint is one declaration, one handler, its tests.

/// The HTTP methods SPEC's endpoints use (each endpoint has exactly one, SPEC 3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    Post,
    Delete,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Post => "POST",
            Verb::Delete => "DELETE",
        }
    }
}

/// Who may call an endpoint (SPEC 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Bearer,
    Public,
    /// /register: public without an `Authorization` header, bearer with one (SPEC 4.1).
    Optional,
}

/// How a parameter's value is read (SPEC 3.4), with the limits that belong to its type.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// Text; longer than `max_chars` characters is `<name> is too long` (SPEC 14.2).
    Text { max_chars: Option<usize> },
    /// Money (SPEC 3.4): a decimal with at most 2 fractional digits, at most
    /// [`super::params::MONEY_MAX_CENTS`]; `positive` refuses 0 as well as negatives.
    Money { positive: bool },
    /// A decimal in `[0, max_millionths]` millionths, kept to 6 decimals; `positive` refuses 0
    /// as sent (SPEC 3.6a: 0.0000004 passes, and is then kept rounded, as 0).
    Millionths { max_millionths: i128, positive: bool },
    /// A whole number (`30`, `30.0`, `"30"`, `3e1`) in `[min, max]`.
    Int { min: i64, max: i64 },
    /// A date (SPEC 3.4).
    Date,
    /// `true`/`false` and their spellings (SPEC 3.4).
    Bool,
    /// Seconds (or days) since the epoch, or a date (SPEC 5.4).
    NumericDate,
}

/// The messages of a parameter's checks, in the order they are made. `None`: the check does not
/// apply (the parameter is optional, or its type has no such case).
#[derive(Debug, Clone, Copy)]
pub struct Msgs {
    /// Absent (missing, null, `{}`, `[]` or the empty string).
    pub missing: Option<&'static str>,
    /// Present but not of its type (not numeric, not a date, not a whole number in range).
    pub invalid: &'static str,
    /// Numeric but negative (or zero where zero is refused).
    pub out_of_range: Option<&'static str>,
    /// Numeric but past the type's largest value, when that has its own message.
    pub too_large: Option<&'static str>,
}

impl Msgs {
    /// An optional parameter whose only failure is `invalid`.
    pub const fn invalid(invalid: &'static str) -> Msgs {
        Msgs { missing: None, invalid, out_of_range: None, too_large: None }
    }
    /// A required parameter: `missing` when absent, else only `invalid`.
    pub const fn required(missing: &'static str, invalid: &'static str) -> Msgs {
        Msgs { missing: Some(missing), invalid, out_of_range: None, too_large: None }
    }
    pub const fn out_of_range(self, msg: &'static str) -> Msgs {
        Msgs { out_of_range: Some(msg), ..self }
    }
    pub const fn too_large(self, msg: &'static str) -> Msgs {
        Msgs { too_large: Some(msg), ..self }
    }
}

/// One parameter of an endpoint.
#[derive(Debug)]
pub struct Param {
    pub name: &'static str,
    pub kind: Kind,
    pub msgs: Msgs,
    /// What it means, for the OpenAPI document.
    pub doc: &'static str,
}

impl Param {
    /// A text parameter; `missing` makes it required.
    pub const fn text(
        name: &'static str,
        missing: Option<&'static str>,
        max_chars: Option<usize>,
        doc: &'static str,
    ) -> Param {
        Param {
            name,
            kind: Kind::Text { max_chars },
            msgs: Msgs { missing, invalid: "", out_of_range: None, too_large: None },
            doc,
        }
    }
    pub const fn new(name: &'static str, kind: Kind, msgs: Msgs, doc: &'static str) -> Param {
        Param { name, kind, msgs, doc }
    }
    pub fn required(&self) -> bool {
        self.msgs.missing.is_some()
    }
}

/// The JSON shape of an answer's field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Str,
    Num,
    Int,
    Bool,
    NullableStr,
    NullableNum,
    NullableInt,
    Strs,
    /// An array of objects of a named schema (`components/schemas`); with `frame`, one the
    /// reference writes as an R data frame (rows of plain values, SPEC 8.3, 10.18).
    Rows {
        schema: &'static str,
        frame: bool,
    },
    /// An object of a named schema.
    Object {
        schema: &'static str,
    },
    /// An array of inline objects with these text members.
    Records(&'static [&'static str]),
    /// A member that only some answers carry.
    Optional(&'static Shape),
}

/// One field of a success answer, in the order it is written.
pub type Field = (&'static str, Shape);

/// One row of an endpoint's error table (SPEC 5-9) that no parameter declaration gives: the
/// statuses it can answer (two where the role decides), when, and the error text.
#[derive(Debug)]
pub struct Row {
    pub statuses: &'static [u16],
    pub condition: &'static str,
    pub error: &'static str,
}

/// A row answered with one status: `row!(404, "condition", "error")`.
macro_rules! row {
    ($status:literal, $condition:expr, $error:expr) => {
        $crate::api::decl::Row { statuses: &[$status], condition: $condition, error: $error }
    };
}
pub(crate) use row;

impl Row {
    /// The message a handler answers: the row's error text between its backticks.
    pub fn message(&self) -> &'static str {
        let e = self.error;
        e.strip_prefix('`').and_then(|m| m.strip_suffix('`')).filter(|m| !m.contains('`')).unwrap_or(e)
    }

    /// The row as a handler's error (its first status; see `Rq::role_not_found` for a row whose
    /// status depends on the role).
    pub fn err(&self) -> super::ApiError {
        super::ApiError::new(self.statuses.first().copied().unwrap_or(500), self.message())
    }
}

/// "404 if the caller is an admin, else 403" (SPEC 3.6).
pub const fn by_role(condition: &'static str, error: &'static str) -> Row {
    Row { statuses: &[403, 404], condition, error }
}

/// What an endpoint's request body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// Parameters as JSON or a form, merged with the query's (SPEC 3.2), at most
    /// [`PARAMS_MAX_BYTES`].
    Params,
    /// A document the handler reads whole (a bank statement), at most `max_bytes`; parameters
    /// then come from the query alone.
    Raw { max_bytes: usize },
}

/// Largest parameter body (SPEC 3.2).
pub const PARAMS_MAX_BYTES: usize = 1 << 20;

impl Body {
    pub fn max_bytes(self) -> usize {
        match self {
            Body::Params => PARAMS_MAX_BYTES,
            Body::Raw { max_bytes } => max_bytes,
        }
    }
}

/// An endpoint.
#[derive(Debug)]
pub struct Endpoint {
    pub verb: Verb,
    pub path: &'static str,
    pub ep: super::Ep,
    /// Prefix of its 500 message (SPEC 3.6).
    pub prefix: &'static str,
    pub summary: &'static str,
    pub access: Access,
    /// Writes the caller's data: an `Idempotency-Key` is honoured (docs/api.md).
    pub writes: bool,
    pub body: Body,
    /// In the order they are checked.
    pub params: &'static [&'static Param],
    pub fields: &'static [Field],
    /// The failures of its table that are not a parameter's own, in the order they are checked
    /// after the parameters'.
    pub errors: &'static [Row],
}

impl Endpoint {
    /// A bearer endpoint that only reads.
    pub const fn read(
        path: &'static str,
        ep: super::Ep,
        prefix: &'static str,
        summary: &'static str,
        params: &'static [&'static Param],
        fields: &'static [Field],
        errors: &'static [Row],
    ) -> Endpoint {
        Endpoint {
            verb: Verb::Get,
            path,
            ep,
            prefix,
            summary,
            access: Access::Bearer,
            writes: false,
            body: Body::Params,
            params,
            fields,
            errors,
        }
    }

    /// A bearer endpoint that writes (POST unless `verb` says otherwise).
    pub const fn write(
        path: &'static str,
        ep: super::Ep,
        prefix: &'static str,
        summary: &'static str,
        params: &'static [&'static Param],
        fields: &'static [Field],
        errors: &'static [Row],
    ) -> Endpoint {
        Endpoint {
            verb: Verb::Post,
            writes: true,
            ..Endpoint::read(path, ep, prefix, summary, params, fields, errors)
        }
    }
}
