//! The generator behind [`AmqpMethod`](super::AmqpMethod): one `amqp_methods!` invocation
//! lists every method once (ids, name, content flag, fields, wire order) and gets the enum,
//! its encoder, decoder, ids, names and content flags from that single table, so they
//! cannot disagree.
//!
//! Each entry reads
//!
//! ```text
//! /// docs
//! Variant(class_id, method_id, "class.method", content) {
//!     /// docs
//!     field: Type,
//! } wire [field, [reserved Type], ...];
//! ```
//!
//! `wire` lists the arguments in the specification's order: a field name, or
//! `[reserved Type]` for a reserved argument, which is written as the type's default and
//! skipped when read (AMQP 0-9-1 §4.2.5: reserved fields are ignored by the recipient).

/// Appends one wire item: a field by name or a reserved argument's default.
macro_rules! amqp_wire_put {
    ($e:ident, [reserved $t:ty]) => {
        WireField::put(&<$t>::default(), &mut $e)
    };
    ($e:ident, $field:ident) => {
        WireField::put($field, &mut $e)
    };
}

/// Reads one wire item into a local of the field's name, or skips a reserved argument.
macro_rules! amqp_wire_get {
    ($d:ident, [reserved $t:ty]) => {
        let _: $t = WireField::get(&mut $d, "reserved argument")?;
    };
    ($d:ident, $field:ident) => {
        let $field = WireField::get(&mut $d, stringify!($field))?;
    };
}

/// Defines `AmqpMethod` and its table-driven methods; see the module docs for the syntax.
macro_rules! amqp_methods {
    ($(
        $(#[$vmeta:meta])*
        $variant:ident($class:literal, $method:literal, $name:literal, $content:literal) {
            $( $(#[$fmeta:meta])* $field:ident : $fty:ty ),* $(,)?
        } wire [ $($w:tt),* $(,)? ];
    )*) => {
        /// One AMQP 0-9-1 method with its arguments (AMQP 0-9-1 §4.2.4, the classes of the
        /// specification, RabbitMQ's extensions).
        ///
        /// Reserved arguments are not fields: they are written as zero or empty and
        /// ignored when read. Methods without arguments are written `Variant {}`.
        #[derive(Clone, Debug, PartialEq)]
        pub enum AmqpMethod {
            $(
                $(#[$vmeta])*
                $variant { $( $(#[$fmeta])* $field: $fty ),* },
            )*
        }

        impl AmqpMethod {
            /// The method's class id and method id (the first 4 bytes of its payload).
            pub fn class_method_id(&self) -> (u16, u16) {
                match self {
                    $( AmqpMethod::$variant { .. } => ($class, $method), )*
                }
            }

            /// The method's name as the specification writes it, e.g. `basic.publish`.
            pub fn name(&self) -> &'static str {
                match self {
                    $( AmqpMethod::$variant { .. } => $name, )*
                }
            }

            /// Whether the method carries content: a content header frame and body frames
            /// follow it (AMQP 0-9-1 §4.2.6; `basic.publish`, `basic.return`,
            /// `basic.deliver`, `basic.get-ok`).
            pub fn has_content(&self) -> bool {
                match self {
                    $( AmqpMethod::$variant { .. } => $content, )*
                }
            }

            /// Appends the method payload: class id, method id, arguments (AMQP 0-9-1
            /// §4.2.4). The frame around it is [`write_method`](super::write_method)'s.
            pub fn encode(&self, out: &mut Vec<u8>) {
                let (class_id, method_id) = self.class_method_id();
                put_u16(out, class_id);
                put_u16(out, method_id);
                let mut e = Encoder::new(out);
                match self {
                    $(
                        #[allow(unused_variables, reason = "a method without fields binds none")]
                        AmqpMethod::$variant { $($field),* } => {
                            $( amqp_wire_put!(e, $w); )*
                        }
                    )*
                }
            }

            /// The name of a method by ids, or `None` for ids not in the table.
            pub fn name_of(class_id: u16, method_id: u16) -> Option<&'static str> {
                match (class_id, method_id) {
                    $( ($class, $method) => Some($name), )*
                    _ => None,
                }
            }

            /// For tests: the wire items of the method with these ids (field names and
            /// `[reserved T]`, stringified) and its fields' names and types.
            #[cfg(test)]
            pub(crate) fn layout_of(
                class_id: u16,
                method_id: u16,
            ) -> Option<(Vec<&'static str>, Vec<(&'static str, &'static str)>)> {
                match (class_id, method_id) {
                    $(
                        ($class, $method) => Some((
                            vec![$(stringify!($w)),*],
                            vec![$((stringify!($field), stringify!($fty))),*],
                        )),
                    )*
                    _ => None,
                }
            }

            /// Decodes the arguments of the method with these ids; `None` for unknown ids.
            fn decode_args(
                class_id: u16,
                method_id: u16,
                args: &[u8],
            ) -> Option<Result<AmqpMethod, DecodeError>> {
                match (class_id, method_id) {
                    $(
                        ($class, $method) => Some((|| -> Result<AmqpMethod, DecodeError> {
                            #[allow(unused_mut, reason = "a method without fields reads none")]
                            let mut d = Decoder::new(args);
                            $( amqp_wire_get!(d, $w); )*
                            d.finish()?;
                            Ok(AmqpMethod::$variant { $($field),* })
                        })()),
                    )*
                    _ => None,
                }
            }
        }
    };
}
