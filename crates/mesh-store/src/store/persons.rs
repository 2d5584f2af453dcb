//! Persons: operators and the tools each may call.

use std::collections::BTreeMap;

use mesh_core::names::Name;
use mesh_core::operation::Role;
use mesh_core::records::{ToolAccess, ToolListError};

use super::name;
use crate::error::{MalformedValue, StoreError};
use crate::records::Person;
use crate::secret::check_user_key;
use crate::{Store, now_ms, principal, with_pool};

const PERSON_COLUMNS: &str = "name, all_tools, created_at, role";

type PersonRow = (String, i64, i64, Option<String>);

fn person_from(row: PersonRow, tools: Vec<String>) -> Result<Person, StoreError> {
    let read = match row.1 {
        1 => Ok(ToolAccess::All),
        0 => match ToolAccess::from_written(&tools) {
            // Every tool is recorded as all_tools = 1, never as a "*" row:
            // a list that reads as every tool was not written by mesh.
            Ok(ToolAccess::All) => Err(ToolListError::StarInList),
            other => other,
        },
        other => {
            return Err(StoreError::malformed(
                "person",
                MalformedValue::AllTools(other),
            ));
        }
    };
    let tools = read.map_err(|source| {
        StoreError::malformed(
            "person",
            MalformedValue::Tools {
                person: row.0.clone(),
                source,
            },
        )
    })?;
    let role = row
        .3
        .map(|r| {
            r.parse::<Role>().map_err(|source| {
                StoreError::malformed(
                    "person",
                    MalformedValue::Role {
                        person: row.0.clone(),
                        source,
                    },
                )
            })
        })
        .transpose()?;
    Ok(Person {
        name: name("person", row.0)?,
        tools,
        role,
        created_at: row.2,
    })
}

impl Store {
    /// Records `person` with the tools they may call (replacing any earlier
    /// grant).
    pub async fn put_person(&self, person: &Name, tools: &ToolAccess) -> Result<(), StoreError> {
        let now = now_ms();
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            put_person_in!(tx, person, tools, now);
            tx.commit().await?;
            Ok(())
        })
    }

    /// Records `person` whole, in one transaction: the tools they may call
    /// (replacing any earlier grant), their role, and either the key they
    /// sign in with or, given `login` and no key, a one-time login of that
    /// life (issued here, returned). Nothing is recorded if any part is
    /// refused (a key another person's).
    pub async fn record_person(
        &self,
        person: &Name,
        tools: &ToolAccess,
        role: Option<Role>,
        key: Option<&str>,
        login: Option<std::time::Duration>,
    ) -> Result<Option<crate::IssuedLogin>, StoreError> {
        if let Some(k) = key {
            check_user_key("a person's key", k)?;
        }
        let now = now_ms();
        let login = match (key, login) {
            (None, Some(life)) => {
                let (secret, login_key) = crate::secret::new_user_key();
                Some(crate::IssuedLogin {
                    person: person.clone(),
                    secret,
                    login_key,
                    expires_at: now.saturating_add(crate::duration_ms(life)),
                })
            }
            _ => None,
        };
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            put_person_in!(tx, person, tools, now);
            sqlx::query("UPDATE persons SET role = $1 WHERE name = $2")
                .bind(role.map(Role::as_str))
                .bind(person.as_str())
                .execute(&mut *tx)
                .await?;
            if let Some(k) = key {
                set_person_key_in!(tx, person, k, now);
            }
            if let Some(l) = &login {
                sqlx::query(
                    "UPDATE persons SET login_key = $1, login_expires_at = $2 WHERE name = $3",
                )
                .bind(&l.login_key)
                .bind(l.expires_at)
                .bind(person.as_str())
                .execute(&mut *tx)
                .await?;
                put_amqp_hash_in!(
                    tx,
                    &l.login_key,
                    super::amqp_hashes::hash_of(&l.secret),
                    now
                );
            }
            tx.commit().await?;
            Ok(())
        })?;
        Ok(login)
    }

    /// Sets `person`'s role (none: tools only). Returns whether the person
    /// is recorded; an unknown one is left unrecorded.
    pub async fn set_person_role(
        &self,
        person: &Name,
        role: Option<Role>,
    ) -> Result<bool, StoreError> {
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            let set = sqlx::query("UPDATE persons SET role = $1 WHERE name = $2")
                .bind(role.map(Role::as_str))
                .bind(person.as_str())
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(set.rows_affected() == 1)
        })
    }

    pub async fn person(&self, person: &Name) -> Result<Option<Person>, StoreError> {
        let (row, tools) = with_pool!(self, |pool| {
            let row: Option<PersonRow> = sqlx::query_as(&format!(
                "SELECT {PERSON_COLUMNS} FROM persons WHERE name = $1"
            ))
            .bind(person.as_str())
            .fetch_optional(pool)
            .await?;
            let tools: Vec<(String, String)> = sqlx::query_as(
                "SELECT person, tool FROM person_tools WHERE person = $1 ORDER BY tool",
            )
            .bind(person.as_str())
            .fetch_all(pool)
            .await?;
            Ok((row, tools))
        })?;
        let Some(row) = row else { return Ok(None) };
        person_from(row, tools.into_iter().map(|(_, t)| t).collect()).map(Some)
    }

    /// Every person, by name.
    pub async fn persons(&self) -> Result<Vec<Person>, StoreError> {
        let (rows, tools) = with_pool!(self, |pool| {
            let rows: Vec<PersonRow> = sqlx::query_as(&format!(
                "SELECT {PERSON_COLUMNS} FROM persons ORDER BY name"
            ))
            .fetch_all(pool)
            .await?;
            let tools: Vec<(String, String)> =
                sqlx::query_as("SELECT person, tool FROM person_tools ORDER BY person, tool")
                    .fetch_all(pool)
                    .await?;
            Ok((rows, tools))
        })?;
        let mut by_person: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (p, t) in tools {
            by_person.entry(p).or_default().push(t);
        }
        rows.into_iter()
            .map(|row| {
                let tools = by_person.remove(&row.0).unwrap_or_default();
                person_from(row, tools)
            })
            .collect()
    }

    /// Removes `person` and their credential. Returns whether they existed.
    pub async fn remove_person(&self, person: &Name) -> Result<bool, StoreError> {
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            sqlx::query("DELETE FROM credentials WHERE principal = $1 AND kind = 'person'")
                .bind(principal::person(person))
                .execute(&mut *tx)
                .await?;
            sqlx::query("DELETE FROM person_tools WHERE person = $1")
                .bind(person.as_str())
                .execute(&mut *tx)
                .await?;
            let gone = sqlx::query("DELETE FROM persons WHERE name = $1")
                .bind(person.as_str())
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(gone.rows_affected() == 1)
        })
    }

    /// Records `key` (an NKey user public key, `U…`) as how `person` signs
    /// in, replacing an earlier one. A key already another person's is
    /// refused: two persons on one key would be one person with two names.
    pub async fn set_person_key(&self, person: &Name, key: &str) -> Result<(), StoreError> {
        check_user_key("a person's key", key)?;
        let now = now_ms();
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            set_person_key_in!(tx, person, key, now);
            tx.commit().await?;
            Ok(())
        })
    }

    /// Every person's NKey public key, by person.
    pub async fn person_keys(&self) -> Result<Vec<(Name, String)>, StoreError> {
        let rows: Vec<(String, String)> = with_pool!(self, |pool| {
            Ok(
                sqlx::query_as("SELECT person, nkey FROM person_keys ORDER BY person")
                    .fetch_all(pool)
                    .await?,
            )
        })?;
        rows.into_iter()
            .map(|(p, k)| Ok((name("person", p)?, k)))
            .collect()
    }
}
