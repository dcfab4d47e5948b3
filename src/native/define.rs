//! The generator behind [`Method`](super::Method), as [`crate::amqp`]'s `define.rs` is
//! behind `AmqpMethod`: one `native_methods!` invocation in [`super::method`] lists every
//! method once (id, name, fields with their wire types, in wire order) and gets the enum,
//! [`Method::id`](super::Method::id), [`Method::name`](super::Method::name),
//! [`method_name`](super::method_name), [`Method::encode`](super::Method::encode) and the
//! decoder behind [`Method::decode`](super::Method::decode) from that single table, so they
//! cannot disagree. `native_records!` does the same for the structs a method carries
//! (`PolicySpec`, `PublishMessage`, …).
//!
//! A method entry reads
//!
//! ```text
//! /// docs (the id and the fields in wire order, as docs/protocol.md writes them)
//! Variant(0xNNNN, "class.method") {
//!     /// docs
//!     field: RustType as WireType,
//! },
//! Variant(0xNNNN, "class.method"),                          // no fields: a unit variant
//! Variant(0xNNNN, "class.method")(name: RustType as WireType), // one unnamed field
//! ```
//!
//! A wire type is a marker of [`super::wire`] (`Sstr`, `Lstr`, `U16`, `Table`, `Record`,
//! `Counted<Record, MAX>`, …); fields are written and read in the order listed, and a
//! field's name is what a decode error calls it. A one-field tuple variant names its field
//! only for the generated code. A record entry is a struct with the same field syntax:
//!
//! ```text
//! /// docs
//! #[derive(...)]
//! Name {
//!     /// docs
//!     field: RustType as WireType,
//! }
//! ```

/// Defines `Method`, its ids, names, encoder and decoder, and `method_name`; see the module
/// docs for the syntax.
macro_rules! native_methods {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident($id:literal, $name:literal)
        $( { $( $(#[$fmeta:meta])* $field:ident : $fty:ty as $wire:ty ),* $(,)? } )?
        $( ( $tfield:ident : $tty:ty as $twire:ty ) )?
    ),* $(,)?) => {
        /// Every method of the native protocol. Ids are given as `0xNNNN`; each variant's
        /// doc lists its fields in wire order (docs/protocol.md §7).
        #[derive(Clone, Debug, PartialEq)]
        pub enum Method {
            $(
                $(#[doc = $doc])*
                $variant
                    $( { $( $(#[$fmeta])* $field: $fty ),* } )?
                    $( ($tty) )?,
            )*
        }

        impl Method {
            /// The method's wire id.
            pub fn id(&self) -> u16 {
                match self {
                    $( Method::$variant { .. } => $id, )*
                }
            }

            /// The method's name as in AMQP (`queue.declare`), for logs and error texts.
            pub fn name(&self) -> &'static str {
                match self {
                    $( Method::$variant { .. } => $name, )*
                }
            }

            /// Appends the payload: method id, request id, fields.
            pub fn encode(&self, request_id: u32, out: &mut Vec<u8>) {
                $crate::types::codec::put_u16(out, self.id());
                $crate::types::codec::put_u32(out, request_id);
                match self {
                    $(
                        Method::$variant $( { $($field),* } )? $( ($tfield) )? => {
                            $($(
                                <$wire as $crate::native::wire::Wire<$fty>>::put($field, out);
                            )*)?
                            $( <$twire as $crate::native::wire::Wire<$tty>>::put($tfield, out); )?
                        }
                    )*
                }
            }

            /// Decodes the fields of the method with this id, up to the last one (leftover
            /// bytes are the caller's to refuse).
            ///
            /// # Errors
            /// [`DecodeError`](crate::error::DecodeError) for an unknown id or a truncated
            /// or malformed field.
            fn decode_fields(
                id: u16,
                r: &mut $crate::types::codec::Reader<'_>,
            ) -> Result<Method, $crate::error::DecodeError> {
                Ok(match id {
                    $(
                        $id => {
                            $($(
                                let $field = <$wire as $crate::native::wire::Wire<$fty>>::get(
                                    r,
                                    stringify!($field),
                                )?;
                            )*)?
                            $(
                                let $tfield = <$twire as $crate::native::wire::Wire<$tty>>::get(
                                    r,
                                    stringify!($tfield),
                                )?;
                            )?
                            Method::$variant $( { $($field),* } )? $( ($tfield) )?
                        }
                    )*
                    other => {
                        return Err($crate::error::DecodeError::new(format!(
                            "unknown method id 0x{other:04x}"
                        )))
                    }
                })
            }

            /// For tests: the variant, its doc text and its fields (name, Rust type, wire
            /// type, stringified) for a method id; `None` for ids not in the table.
            #[cfg(test)]
            pub(crate) fn layout_of(id: u16) -> Option<$crate::native::define::Layout> {
                match id {
                    $(
                        $id => Some($crate::native::define::Layout {
                            variant: stringify!($variant),
                            doc: concat!($($doc, "\n"),*),
                            fields: vec![
                                $($( (stringify!($field), stringify!($fty), stringify!($wire)), )*)?
                                $( (stringify!($tfield), stringify!($tty), stringify!($twire)), )?
                            ],
                        }),
                    )*
                    _ => None,
                }
            }
        }

        /// The AMQP-style name of a method id (`"unknown"` for ids not in the protocol).
        pub fn method_name(id: u16) -> &'static str {
            match id {
                $( $id => $name, )*
                _ => "unknown",
            }
        }
    };
}

/// Defines each struct with public fields and its [`Record`](super::wire::Record) codec
/// (the fields in declared order); see the module docs for the syntax.
macro_rules! native_records {
    ($(
        $(#[$meta:meta])*
        $record:ident {
            $( $(#[$fmeta:meta])* $field:ident : $fty:ty as $wire:ty ),* $(,)?
        }
    )*) => {
        $(
            $(#[$meta])*
            pub struct $record {
                $( $(#[$fmeta])* pub $field: $fty, )*
            }

            impl $crate::native::wire::Wire<$record> for $crate::native::wire::Record {
                const BYTES_MIN: usize =
                    0 $( + <$wire as $crate::native::wire::Wire<$fty>>::BYTES_MIN )*;

                fn put(value: &$record, out: &mut Vec<u8>) {
                    $( <$wire as $crate::native::wire::Wire<$fty>>::put(&value.$field, out); )*
                }

                fn get(
                    r: &mut $crate::types::codec::Reader<'_>,
                    _what: &str,
                ) -> Result<$record, $crate::error::DecodeError> {
                    Ok($record {
                        $(
                            $field: <$wire as $crate::native::wire::Wire<$fty>>::get(
                                r,
                                stringify!($field),
                            )?,
                        )*
                    })
                }
            }
        )*

        /// For tests: the fields (name, Rust type, wire type, stringified) of a record by
        /// its type name; `None` for other names.
        #[cfg(test)]
        pub(crate) fn record_fields(
            name: &str,
        ) -> Option<Vec<(&'static str, &'static str, &'static str)>> {
            match name {
                $(
                    stringify!($record) => Some(vec![
                        $( (stringify!($field), stringify!($fty), stringify!($wire)), )*
                    ]),
                )*
                _ => None,
            }
        }
    };
}

/// For tests: one method entry of the table as text ([`Method::layout_of`](super::Method)).
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct Layout {
    /// The variant's name.
    pub variant: &'static str,
    /// Its doc comment, one line per doc line.
    pub doc: &'static str,
    /// Its fields in wire order: name, Rust type, wire type.
    pub fields: Vec<(&'static str, &'static str, &'static str)>,
}
