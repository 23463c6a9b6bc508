//! `#[derive(Soa)]` turns a struct of scalars, `[T; K]` vectors and `[[T; C]; R]` matrices
//! into a zerohop structure-of-arrays table type:
//!
//! ```ignore
//! #[derive(Soa, Clone, Copy, Debug, PartialEq)]
//! struct Hit { energy: f32, pos: [f32; 3], cov: [[f64; 3]; 3], id: i64 }
//!
//! let mut hits = HitTable::with_capacity(1024)?;
//! hits.push(Hit { energy: 1.0, pos: [0.0; 3], cov: [[0.0; 3]; 3], id: 7 })?;
//! let energies: &[f32] = hits.energy();          // one contiguous, 128-B-aligned column
//! let x: &[f32] = hits.pos(0);                    // component 0 of every pos
//! let back: Vec<Hit> = hits.to_aos();
//! ```
//!
//! Generated items (for a struct `Hit`): `impl zerohop::soa::SoaRecord for Hit`, `HitTable`
//! (typed accessors per field, `push`, `extend`, `from_aos`, `to_aos`, `get`, `set`, `row`,
//! and `table()` for tensor maps), and `HitRef<'_>` (a row reference with one getter per
//! field). Matrices are stored row-major (component `r*C + c`).

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Tokens;
use quote::{format_ident, quote};
use syn::{parse_macro_input, Data, DeriveInput, Expr, Fields, Type};

enum Shape {
    Scalar(Type),
    Vector(Type, Expr),
    Matrix(Type, Expr, Expr),
}

fn shape_of(ty: &Type) -> Shape {
    if let Type::Array(outer) = ty {
        if let Type::Array(inner) = &*outer.elem {
            return Shape::Matrix((*inner.elem).clone(), outer.len.clone(), inner.len.clone());
        }
        return Shape::Vector((*outer.elem).clone(), outer.len.clone());
    }
    Shape::Scalar(ty.clone())
}

#[proc_macro_derive(Soa)]
pub fn derive_soa(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(tokens) => tokens.into(),
        Err(err) => err.to_compile_error().into(),
    }
}

fn expand(input: &DeriveInput) -> syn::Result<Tokens> {
    let name = &input.ident;
    let vis = &input.vis;
    if !input.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &input.generics,
            "#[derive(Soa)] does not support generic structs",
        ));
    }
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new_spanned(
            name,
            "#[derive(Soa)] needs a struct",
        ));
    };
    let Fields::Named(fields) = &data.fields else {
        return Err(syn::Error::new_spanned(
            name,
            "#[derive(Soa)] needs a struct with named fields",
        ));
    };
    if fields.named.is_empty() {
        return Err(syn::Error::new_spanned(
            name,
            "#[derive(Soa)] needs at least one field",
        ));
    }
    let table = format_ident!("{}Table", name);
    let row_ref = format_ident!("{}Ref", name);
    let zh = quote!(::zerohop);

    let mut schema_calls = Vec::new();
    let mut accessors = Vec::new();
    let mut ref_getters = Vec::new();
    let mut gather_fields = Vec::new();
    let mut scatter_stmts = Vec::new();
    for field in &fields.named {
        let ident = field.ident.as_ref().expect("named field");
        let column = ident.to_string();
        let ident_mut = format_ident!("{}_mut", ident);
        let doc = format!("Column `{column}`.");
        match shape_of(&field.ty) {
            Shape::Scalar(t) => {
                schema_calls.push(quote! {
                    .column(#column, <#t as #zh::Element>::DTYPE)
                });
                accessors.push(quote! {
                    #[doc = #doc]
                    pub fn #ident(&self) -> &[#t] {
                        &self.table.component::<#t>(#column, 0).expect("derived column")[..self.len]
                    }
                    #[doc = #doc]
                    pub fn #ident_mut(&mut self) -> &mut [#t] {
                        let len = self.len;
                        &mut self.table.component_mut::<#t>(#column, 0).expect("derived column")[..len]
                    }
                });
                ref_getters.push(quote! {
                    pub fn #ident(&self) -> #t { self.table.#ident()[self.index] }
                });
                gather_fields.push(quote! { #ident: self.#ident()[index] });
                scatter_stmts.push(quote! { self.#ident_mut()[index] = value.#ident; });
            }
            Shape::Vector(t, k) => {
                schema_calls.push(quote! {
                    .vector(#column, <#t as #zh::Element>::DTYPE, #k)
                });
                accessors.push(quote! {
                    #[doc = #doc]
                    #[doc = "Component `k` of every row."]
                    pub fn #ident(&self, k: usize) -> &[#t] {
                        &self.table.component::<#t>(#column, k).expect("component in range")[..self.len]
                    }
                    #[doc = #doc]
                    pub fn #ident_mut(&mut self, k: usize) -> &mut [#t] {
                        let len = self.len;
                        &mut self.table.component_mut::<#t>(#column, k).expect("component in range")[..len]
                    }
                });
                ref_getters.push(quote! {
                    pub fn #ident(&self) -> [#t; #k] {
                        ::std::array::from_fn(|k| self.table.#ident(k)[self.index])
                    }
                });
                gather_fields.push(quote! {
                    #ident: ::std::array::from_fn(|k| self.#ident(k)[index])
                });
                scatter_stmts.push(quote! {
                    for k in 0..(#k) { self.#ident_mut(k)[index] = value.#ident[k]; }
                });
            }
            Shape::Matrix(t, r, c) => {
                schema_calls.push(quote! {
                    .matrix(#column, <#t as #zh::Element>::DTYPE, #r, #c, #zh::soa::ComponentOrder::RowMajor)
                });
                accessors.push(quote! {
                    #[doc = #doc]
                    #[doc = "Element (r, c) of every row."]
                    pub fn #ident(&self, r: usize, c: usize) -> &[#t] {
                        assert!(r < (#r) && c < (#c), "matrix index out of range");
                        &self.table.component::<#t>(#column, r * (#c) + c).expect("component in range")[..self.len]
                    }
                    #[doc = #doc]
                    pub fn #ident_mut(&mut self, r: usize, c: usize) -> &mut [#t] {
                        assert!(r < (#r) && c < (#c), "matrix index out of range");
                        let len = self.len;
                        &mut self.table.component_mut::<#t>(#column, r * (#c) + c).expect("component in range")[..len]
                    }
                });
                ref_getters.push(quote! {
                    pub fn #ident(&self) -> [[#t; #c]; #r] {
                        ::std::array::from_fn(|r| ::std::array::from_fn(|c| self.table.#ident(r, c)[self.index]))
                    }
                });
                gather_fields.push(quote! {
                    #ident: ::std::array::from_fn(|r| ::std::array::from_fn(|c| self.#ident(r, c)[index]))
                });
                scatter_stmts.push(quote! {
                    for r in 0..(#r) { for c in 0..(#c) { self.#ident_mut(r, c)[index] = value.#ident[r][c]; } }
                });
            }
        }
    }

    Ok(quote! {
        impl #zh::soa::SoaRecord for #name {
            fn schema() -> #zh::soa::Schema {
                #zh::soa::Schema::builder()
                    #(#schema_calls)*
                    .build()
                    .expect("a derived schema is valid")
            }
        }

        #[doc = concat!("Structure-of-arrays storage of [`", stringify!(#name), "`] rows.")]
        #[derive(Debug, Clone)]
        #vis struct #table {
            table: #zh::soa::SoaTable,
            len: usize,
        }

        #[doc = concat!("A reference to one row of a [`", stringify!(#table), "`].")]
        #[derive(Debug, Clone, Copy)]
        #vis struct #row_ref<'a> {
            table: &'a #table,
            index: usize,
        }

        impl<'a> #row_ref<'a> {
            pub fn index(&self) -> usize { self.index }
            #(#ref_getters)*
        }

        impl #table {
            /// An empty table with room for `capacity` rows (grows on `push`).
            pub fn with_capacity(capacity: usize) -> #zh::Result<Self> {
                let schema = <#name as #zh::soa::SoaRecord>::schema();
                Ok(Self { table: #zh::soa::SoaTable::new(schema, capacity)?, len: 0 })
            }

            pub fn new() -> #zh::Result<Self> { Self::with_capacity(0) }

            pub fn len(&self) -> usize { self.len }
            pub fn is_empty(&self) -> bool { self.len == 0 }
            pub fn capacity(&self) -> usize { self.table.len() }

            /// The rows as an untyped table (zero-copy), for tensor maps and DLPack.
            pub fn table(&self) -> #zh::soa::SoaTable {
                self.table.slice_rows(0, self.len).expect("len never exceeds capacity")
            }

            #(#accessors)*

            /// A copy of row `index`.
            pub fn get(&self, index: usize) -> Option<#name> {
                (index < self.len).then(|| #name { #(#gather_fields),* })
            }

            /// Overwrites row `index`.
            pub fn set(&mut self, index: usize, value: &#name) -> #zh::Result<()> {
                if index >= self.len {
                    return Err(#zh::Error::InvalidArgument {
                        what: "row".into(),
                        reason: format!("{index} is out of range for {} rows", self.len),
                    });
                }
                #(#scatter_stmts)*
                Ok(())
            }

            pub fn row(&self, index: usize) -> Option<#row_ref<'_>> {
                (index < self.len).then_some(#row_ref { table: self, index })
            }

            /// Appends a row, doubling the capacity (one copy of the columns) when full.
            pub fn push(&mut self, value: #name) -> #zh::Result<()> {
                if self.len == self.capacity() {
                    self.reserve(self.len.max(8))?;
                }
                self.len += 1;
                self.set(self.len - 1, &value)
            }

            /// Makes room for at least `additional` more rows.
            pub fn reserve(&mut self, additional: usize) -> #zh::Result<()> {
                let needed = self.len.checked_add(additional).ok_or_else(|| #zh::Error::InvalidArgument {
                    what: "capacity".into(),
                    reason: "overflows usize".into(),
                })?;
                if needed > self.capacity() {
                    self.table = self.table.regrown(needed.max(self.capacity() * 2), self.len)?;
                }
                Ok(())
            }

            pub fn extend<I: IntoIterator<Item = #name>>(&mut self, rows: I) -> #zh::Result<()> {
                let rows = rows.into_iter();
                self.reserve(rows.size_hint().0)?;
                for row in rows {
                    self.push(row)?;
                }
                Ok(())
            }

            /// A table holding `rows` (array of structs → structure of arrays).
            pub fn from_aos(rows: &[#name]) -> #zh::Result<Self> {
                let mut t = Self::with_capacity(rows.len())?;
                t.len = rows.len();
                for (index, value) in rows.iter().enumerate() {
                    t.set(index, value)?;
                }
                Ok(t)
            }

            /// The rows as structs (structure of arrays → array of structs).
            pub fn to_aos(&self) -> Vec<#name> {
                (0..self.len).map(|i| self.get(i).expect("in range")).collect()
            }
        }
    })
}
